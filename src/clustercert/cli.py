def main(argv=None):
    print("clustercert: skeleton")
    return 3
